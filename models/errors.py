"""The one exception type of the models package."""

from __future__ import annotations

from tpsim.calibration.bounded import InputError


class ModelError(InputError):
    """Bad model input.

    The message is ONE line naming the field and the bad value, e.g.
    ``"num_attention_heads=0 in config.json: must be a positive integer"``, so the CLI can
    print it as is and exit with status 2.
    """
