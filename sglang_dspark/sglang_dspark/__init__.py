"""SGLang plugin for DSpark drafters; the entry point is :func:`sglang_dspark.plugin.register`."""
