"""The clustering's defaults, in a module without numpy: `cera diarize`'s options show
them, and `cera --help` must not import numpy to list the command."""

# Cosine distance above which an embedding starts a new speaker. Measured on the synthesized
# conversations of tests/audio_diarizer/data (make_conversations.py, reference.npz): whole
# turns of one espeak-ng voice lie at most 0.184 apart, turns of different voices at least
# 0.245; with 4 s pieces, 0.20 and 0.22 give DERs of 3.5%, 4.8% and 2.9% on the three
# conversations and 0.25 merges two voices of three_voices (DER 30.8%).
DEFAULT_THRESHOLD = 0.21
DEFAULT_MAX_SPEAKERS = 4
