"""The dtypes a model's weights, KV cache and activations may take, and their bytes per
element."""

from __future__ import annotations

from tpsim.models.errors import ModelError

#: Bytes per element of each supported dtype.
#: The 4-bit formats carry their block scales: NVFP4 one fp8 (e4m3) scale per 16 elements
#: (0.5 + 1/16 byte), MXFP4 one e8m0 scale per 32 (0.5 + 1/32 byte) (OCP MX spec v1.0;
#: NVIDIA's NVFP4). ``fp4`` is NVFP4, the format of ``--dtype fp4``. ``int4`` is AWQ's and
#: GPTQ's integer format as their checkpoints store it for vLLM's Marlin kernels: eight 4-bit
#: weights packed per int32 (``qweight``), and per group of 128 input rows of each output
#: column an fp16 scale (``scales``) and a 4-bit zero point (``qzeros``, packed eight per
#: int32; GPTQ stores them even when symmetric): 0.5 + (2 + 0.5) / 128 byte.
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4,
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "fp4": 0.5 + 1 / 16,
    "mxfp4": 0.5 + 1 / 32,
    "int4": 0.5 + 2.5 / 128,
}
#: The group of input rows that shares one scale and zero point in ``int4``.
INT4_GROUP = 128


def check_dtype(dtype: object, field: str = "dtype") -> str:
    """Return ``dtype`` if it is a key of DTYPE_BYTES, else raise ModelError naming ``field``."""
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        valid = ", ".join(sorted(DTYPE_BYTES))
        raise ModelError(f"{field}={dtype!r}: unknown dtype; valid: {valid}")
    return dtype
