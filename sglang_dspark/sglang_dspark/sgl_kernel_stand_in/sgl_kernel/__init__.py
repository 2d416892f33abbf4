"""Stand-in for the ``sgl_kernel`` package, importable only when sglang_dspark put it on sys.path.

That happens when SGLang runs on CPU and no ``sgl_kernel`` with CPU ops is installed (registries
ship CUDA builds only). It provides the plain-torch ops of :mod:`sglang_dspark.cpu_ops`, both as
``torch.ops.sgl_kernel.*`` and as module attributes for ``from sgl_kernel import ...``.
"""

import sys

from sglang_dspark.cpu_ops import *  # noqa: F401,F403
from sglang_dspark.cpu_ops import install_placeholders

install_placeholders(sys.modules[__name__])
