"""The clustering's defaults, in a module without numpy: `cera diarize`'s options show
them, and `cera --help` must not import numpy to list the command."""

# Cosine distance above which an embedding starts a new speaker. Measured on the synthesized
# conversations of tests/audio_diarizer/data (make_conversations.py, reference.npz): whole
# turns of one espeak-ng voice lie at most 0.184 apart, turns of different voices at least
# 0.245; with 4 s pieces, 0.20 and 0.22 give DERs of 3.5%, 4.8% and 2.9% on the three
# conversations and 0.25 merges two voices of three_voices (DER 30.8%).
DEFAULT_THRESHOLD = 0.21
DEFAULT_MAX_SPEAKERS = 4

# Pieces shorter than this (seconds) never open a speaker; they go to the nearest known one.
# Measured on the same three conversations with ``min_new_speaker_s=0``: the pieces that
# opened a speaker of no voice of their own were 0.38, 0.41 and 0.60 s long (0.44-0.68 in
# cosine distance from the nearest known speaker), those that opened a real voice 2.40 s or
# longer. At 1.0 s the speakers found equal the voices (2, 3, 2) and DER at a 0.25 s collar
# is 2.6%, 4.8% and 2.0% (3.5%, 4.8% and 2.9% with 3, 4 and 3 speakers at 0).
DEFAULT_MIN_NEW_SPEAKER_S = 1.0
