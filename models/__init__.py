"""Transformer model descriptions: the ModelSpec, the catalog and the HF config.json loader.

Pure data and pure functions; never imports simpy or the simulator.
"""

if __name__ != "tpsim.models":  # one name per module
    raise ImportError(f"{__name__}: this folder is tpsim.models; import tpsim.models")


from tpsim.models.catalog import MODELS, get_model
from tpsim.models.errors import ModelError
from tpsim.models.hf_config import load_hf_config, spec_from_hf_dict
from tpsim.models.spec import DTYPE_BYTES, ModelSpec

__all__ = [
    "DTYPE_BYTES",
    "MODELS",
    "ModelError",
    "ModelSpec",
    "get_model",
    "load_hf_config",
    "spec_from_hf_dict",
]
