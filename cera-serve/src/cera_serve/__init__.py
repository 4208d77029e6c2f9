"""cera serve: the OpenAI HTTP API over cera's batching scheduler (see README.md)."""
