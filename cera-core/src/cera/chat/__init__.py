"""Chat: the coordinator on a session (`session`: phases, tool calls, delta-only turns) and
the prompt a template renders for a conversation (`prompt`)."""
