"""The clustering's defaults, in a module without numpy: `cera diarize`'s options show
them, and `cera --help` must not import numpy to list the command."""

# Cosine distance above which an embedding starts a new speaker. Measured on the synthesized
# conversations of tests/audio_diarizer/data (make_conversations.py, reference.npz): whole
# turns of one espeak-ng voice lie at most 0.184 apart, turns of different voices at least
# 0.245; with 4 s pieces, 0.20 and 0.22 give DERs of 3.5%, 4.8% and 2.9% on the three
# conversations and 0.25 merges two voices of three_voices (DER 30.8%).
DEFAULT_THRESHOLD = 0.21
DEFAULT_MAX_SPEAKERS = 4

# Pieces shorter than this (seconds) never open a speaker; they go to the nearest known one
# (a first piece opens one provisionally: cluster.py). Measured with ``min_new_speaker_s=0``
# on the three conversations of tests/audio_diarizer/data: the pieces that opened a speaker
# of no voice of their own were 0.38, 0.41 and 0.60 s long (0.44-0.68 in cosine distance
# from the nearest known speaker), those that opened a real voice 2.40 s or longer; on the
# wake-word clip of tests/audio_pipeline/data the second voice's pieces are 1.05 and 1.56 s.
# On the longer conversations of benchmarks/bench_diarize.py, 1.0 s lets a 1.37 s piece of
# a known voice (0.217 from it) open a speaker in bench_two_voices (4 found of 2), 2.0 s
# gives every file its true count but the wake-word clip's second voice no speaker, and
# 1.5 s gives the true count everywhere but bench_three_voices (4 of 3: a 2.30 s piece of
# its second voice lies 0.232 from that voice's one earlier piece: YOUNG_MARGIN below). DER at a 0.25 s collar
# with 1.5 s: 2.6%, 4.8%, 2.0% on the test conversations (3.5%, 4.8%, 2.9% at 0).
DEFAULT_MIN_NEW_SPEAKER_S = 1.5

# A speaker heard for less than YOUNG_S seconds takes pieces up to DEFAULT_THRESHOLD +
# YOUNG_MARGIN away: its centroid is one or two noisy pieces. Measured on bench_diarize.py's
# bench_three_voices: the second piece of its second voice (2.30 s) lies 0.232 from that
# voice's one earlier piece (1.95 s) and opened a fourth speaker; any margin from 0.03 to
# 0.10 gives every conversation of the tests and the benchmark its true count, with the
# same DERs (bench_three_voices 2.2%, was 17.6%). A voice's first piece far from a young
# speaker still opens its own: three_voices' third voice comes 0.234 from a speaker of
# 3.96 s, the wake-word clip's second voice 0.314 from one of 6 s.
YOUNG_S = 3.0
YOUNG_MARGIN = 0.05
