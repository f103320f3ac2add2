"""Transformer model descriptions: the ModelSpec, the catalog and the HF config.json loader.

Pure data and pure functions; never imports simpy or the simulator.
"""

from models.catalog import MODELS, get_model
from models.errors import ModelError
from models.hf_config import load_hf_config, spec_from_hf_dict
from models.spec import DTYPE_BYTES, ModelSpec

__all__ = [
    "DTYPE_BYTES",
    "MODELS",
    "ModelError",
    "ModelSpec",
    "get_model",
    "load_hf_config",
    "spec_from_hf_dict",
]
