"""Images on the command line: --mmproj FILE and --image FILE (repeatable)."""

from __future__ import annotations

import functools
from pathlib import Path

import click

MEDIA_MARKER = "<__media__>"  # cera.vision.content_parts.MEDIA_MARKER (not imported: `cera --help` stays light)


def image_options(func):
    """--mmproj and --image."""

    @click.option(
        "--mmproj", default=None, metavar="FILE",
        help="Multimodal projector (an mmproj GGUF) for --image. Default: the bundle's, or the one *mmproj*.gguf beside the model.",
    )  # fmt: skip
    @click.option(
        "--image", "images", multiple=True, metavar="FILE",
        help=f"An image to give the model (repeatable): placed at each {MEDIA_MARKER} of the prompt, or before it.",
    )  # fmt: skip
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper


def find_mmproj(model_path: Path) -> Path | None:
    """The one ``*mmproj*.gguf`` beside a model file (None if there is none or several)."""
    found = [p for p in sorted(model_path.parent.glob("*.gguf")) if "mmproj" in p.name.lower() and p != model_path]
    return found[0] if len(found) == 1 else None


def attach_projector(loaded, mmproj: str | None, images, console) -> None:
    """Bind the projector that --image needs (given, or found beside the model)."""
    if not images and mmproj is None:
        return
    companion = loaded.companions.get("multimodal_projector")  # a bundle's manifest names it
    path = Path(mmproj) if mmproj is not None else Path(companion) if companion else find_mmproj(Path(loaded.path))
    if path is None:
        raise click.UsageError(
            f"--image needs a multimodal projector: give --mmproj FILE (no single *mmproj*.gguf lies beside "
            f"{Path(loaded.path).name})"
        )
    loaded.load_projector(path)
    console.detail(f"cera: multimodal projector {path} ({loaded.projector.family})")


def user_content(text: str, images):
    """A user message's content: the text alone, or content parts with the images at the
    prompt's markers (before the text when it has none)."""
    if not images:
        return text
    pieces = text.split(MEDIA_MARKER)
    if len(pieces) == 1:
        pieces = [""] * len(images) + [text]
    if len(pieces) - 1 != len(images):
        raise click.UsageError(f"the prompt has {len(pieces) - 1} {MEDIA_MARKER} markers for {len(images)} --image files")
    parts = []
    for n, piece in enumerate(pieces):
        if piece:
            parts.append({"type": "text", "text": piece})
        if n < len(images):
            parts.append({"type": "image", "image": images[n]})
    return parts


class PendingImages:
    """The images `cera chat` gives its next message: the --image files for the first one,
    then those each ``/image FILE`` attaches."""

    def __init__(self, loaded, images=()):
        self.loaded = loaded
        self.paths = [str(p) for p in images]
        if self.paths:
            from cera.vision.image import load_image

            for p in self.paths:
                load_image(p)  # a bad --image ends the command before the chat starts

    def attach(self, arg: str, console) -> None:
        """``/image FILE``: check the file is an image the model can take, and keep it."""
        if not arg:
            console.note("cera: /image needs a file name: /image FILE")
            return
        if getattr(self.loaded, "projector", None) is None:
            console.note("cera: this model was loaded without a multimodal projector: start cera chat with --mmproj FILE")
            return
        from cera.errors import CeraError
        from cera.vision.image import load_image

        path = Path(arg).expanduser()
        try:
            load_image(path)  # a bad file is refused now, not when the message is sent
        except CeraError as e:
            console.note(f"cera: {e}")
            return
        self.paths.append(str(path))
        n = len(self.paths)
        console.note(f"cera: {path} goes with the next message ({n} image{'s' if n != 1 else ''})")

    def content(self, line: str, console):
        """The next user message's content (None, with a note, when its markers do not match)."""
        try:
            return user_content(line, self.paths)
        except click.UsageError as e:
            console.note(f"cera: {e.message}; the images wait for the next message")
            return None

    def sent(self) -> None:
        self.paths = []
