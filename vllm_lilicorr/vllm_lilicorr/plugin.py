"""Entry point of the ``vllm.general_plugins`` group: ``lilicorr = vllm_lilicorr.plugin:register``.

vLLM calls it in every process (API server, engine core, workers), possibly more than once.
It checks the vLLM version, then installs the patches listed in :mod:`vllm_lilicorr.patches`.
Importing nothing heavy here keeps it cheap when nobody asks for lilicorr: the patches import
what they need when they run.
"""

from __future__ import annotations

import os

from vllm.logger import init_logger

SUPPORTED_VERSIONS = ((0, 32), (0, 33))
SKIP_VERSION_CHECK = "VLLM_LILICORR_SKIP_VERSION_CHECK"

logger = init_logger("vllm." + __name__)  # under vLLM's logging configuration


def version_problem(version: str, version_tuple: tuple) -> str | None:
    """One line saying why this vLLM is unsupported, or None."""
    if tuple(version_tuple[:2]) in SUPPORTED_VERSIONS:
        return None
    supported = ", ".join(f"{a}.{b}.x" for a, b in SUPPORTED_VERSIONS)
    return (f"vllm-lilicorr supports vLLM {supported}, not {version}; install a supported vLLM, "
            f"or set {SKIP_VERSION_CHECK}=1 to try this one anyway")


def register() -> None:
    from vllm.version import __version__, __version_tuple__

    from . import patches

    problem = version_problem(__version__, __version_tuple__)
    if problem is not None and os.environ.get(SKIP_VERSION_CHECK) != "1":
        logger.warning(problem)
        patches.install_refusal(problem)
        return
    patches.install_all()
