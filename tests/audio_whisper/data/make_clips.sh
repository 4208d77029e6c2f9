#!/usr/bin/env bash
# Makes the speech clips the Whisper tests read (espeak-ng and sox from Debian):
# 16 kHz mono 16-bit FLAC. Run from this folder; the outputs are committed.
set -euo pipefail
say() {  # name voice speed text
    espeak-ng -v "$2" -s "$3" -w "/tmp/$1.wav" "$4"
    sox "/tmp/$1.wav" -r 16000 -c 1 -b 16 "$1.flac"
    rm -f "/tmp/$1.wav"
}
say fox en-us 160 "The quick brown fox jumps over the lazy dog. She sells seashells by the seashore."
say numbers en 150 "On March third, twenty twenty one, we paid 45 dollars and 50 cents for 12 apples and 7 oranges."
say question en-us+f3 170 "Hello! How are you today? I'm fine, thanks. And you?"
say slow en-gb-x-rp 120 "Whisper transcribes speech into text, one window of thirty seconds at a time."
say long en-us 150 "Once upon a time, in a small village by the sea, there lived an old fisherman and his wife. \
Every morning he rowed out past the harbor wall, cast his nets, and waited for the tide to turn. \
Some days the nets came back heavy with silver fish, and some days they came back empty. \
His wife mended the nets in the evening while he told her about the weather, the birds, and the ships he had seen. \
One winter a storm kept him on shore for nine days, and the village ran short of bread and firewood. \
When the sky finally cleared, he went out again and found the sea calm and bright, as if nothing had happened."
sox -n -r 16000 -c 1 -b 16 silence.flac trim 0 4
say german de 150 "Guten Morgen. Heute ist das Wetter schön, und wir gehen in den Park spazieren."
say french fr 150 "Bonjour à tous. Aujourd'hui il fait beau, et nous allons nous promener dans le parc."
say spanish es 150 "Buenos días a todos. Hoy hace buen tiempo y vamos a pasear por el parque."
