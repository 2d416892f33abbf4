"""vLLM plugin adding speculative decoding with LiLiCorr drafters (``"method": "lilicorr"``)."""
