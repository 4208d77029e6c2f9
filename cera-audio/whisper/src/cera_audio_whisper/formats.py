"""The weight types `cera convert whisper` writes (a plain table: the CLI imports it
without loading numpy or the converter)."""

OUT_TYPES = ("f16", "f32", "q8_0", "q5_0", "q4_0")
