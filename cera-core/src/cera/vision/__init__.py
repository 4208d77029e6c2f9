"""Images: reading them, and multimodal projectors (mmproj files) that encode them for a text model."""
