"""``sgl_kernel.mamba`` of the stand-in: the GDN/KDA linear-attention CPU ops, imported eagerly by
SGLang's hybrid attention backends. LFM2's short convolution does not use them (its CPU path is
:mod:`sglang_dspark.short_conv`), so they are placeholders that raise when called."""

from sglang_dspark.cpu_ops import not_provided

causal_conv1d_fn_cpu = not_provided("mamba.causal_conv1d_fn_cpu")
causal_conv1d_update_cpu = not_provided("mamba.causal_conv1d_update_cpu")
chunk_gated_delta_rule_cpu = not_provided("mamba.chunk_gated_delta_rule_cpu")
