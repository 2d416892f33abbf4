"""Holds the ``sgl_kernel`` stand-in; :mod:`sglang_dspark.cpu` puts this folder on ``sys.path``."""
