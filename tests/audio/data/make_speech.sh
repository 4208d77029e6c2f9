#!/bin/sh
# Makes the spoken test clips of tests/audio: espeak-ng speaks, sox joins, pads and resamples.
# Needs the Debian packages espeak-ng and sox:  apt-get install -y espeak-ng sox
# Run from this folder: sh make_speech.sh   (the outputs are committed; rerun only to change them)
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
say() { espeak-ng -v en-us -s 175 -w "$tmp/$1.wav" "$2"; }
say a "This is a test of voice activity detection."
say b "The quick brown fox jumps over the lazy dog."
say c "One, two, three."
say d "Goodbye."
# 16 kHz mono; silences of 0.7 s, 1.2 s, 0.25 s and 0.5 s between and around the phrases.
for x in a b c d; do sox "$tmp/$x.wav" -r 16000 -c 1 "$tmp/${x}16.wav"; done
sox -n -r 16000 -c 1 "$tmp/lead.wav" trim 0 0.7
sox -n -r 16000 -c 1 "$tmp/gap1.wav" trim 0 1.2
sox -n -r 16000 -c 1 "$tmp/gap2.wav" trim 0 0.25
sox -n -r 16000 -c 1 "$tmp/gap3.wav" trim 0 0.5
sox "$tmp/lead.wav" "$tmp/a16.wav" "$tmp/gap1.wav" "$tmp/b16.wav" "$tmp/gap2.wav" "$tmp/c16.wav" \
    "$tmp/gap3.wav" "$tmp/d16.wav" "$tmp/gap3.wav" -b 16 speech_16k.flac
sox speech_16k.flac -r 8000 -b 16 speech_8k.flac
soxi speech_16k.flac speech_8k.flac
