"""Engine-free core for block speculative drafters.

Checkpoint specs and their validation, reference implementations of DFlash block drafting,
the LiLiCorr lattice head and walk, DSpark's Markov block decoding, a reference speculative
loop, and the fixture builder. Nothing here imports vLLM, SGLang or llama.cpp.
"""

__version__ = "0.1.0"
