"""Entry point of the ``sglang.srt.plugins`` group.

SGLang calls :func:`register` in every process it starts (launcher, scheduler, detokenizer),
possibly more than once; it registers hooks once per process and changes nothing for runs that
ask neither for DSPARK nor for the CPU engine (see :mod:`sglang_dspark.patches`).
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

SUPPORTED_SGLANG = "0.5.23"
# Set to 1 to load the plugin into another SGLang version anyway (its hooks may not fit).
VERSION_OVERRIDE_ENV = "SGLANG_DSPARK_ALLOW_ANY_VERSION"

_registered = False


def register() -> None:
    global _registered
    if _registered:
        return
    _registered = True
    from sglang.version import __version__ as sglang_version

    if sglang_version != SUPPORTED_SGLANG and os.environ.get(VERSION_OVERRIDE_ENV) != "1":
        logger.error("sglang_dspark supports sglang %s, found %s: not loaded (set %s=1 to load "
                     "it anyway)", SUPPORTED_SGLANG, sglang_version, VERSION_OVERRIDE_ENV)
        return
    from . import patches

    patches.apply()
