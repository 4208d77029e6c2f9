"""`cera plugins`: every installed plugin, what it registered, and what is wrong with it.

This command is for diagnosing an install, so it must keep working when plugins are
broken: a plugin that failed to load is listed with its reason, never raised. It imports
no backend or model code: a backend's usability comes from the cheap `available` check
its plugin module registered (`BackendSpec.unavailable_reason`), not from its factory.
"""

from __future__ import annotations

import json

import click


def _backend_status(manager, names: list[str]) -> list[dict]:
    out = []
    for name in names:
        spec = manager.backends[name]
        reason = spec.unavailable_reason()
        entry = {"name": name, "usable": reason is None, "reason": reason}
        if spec.details is not None:
            try:
                entry["details"] = spec.details()
            except Exception as e:  # noqa: BLE001 - a plugin's broken description must not take the listing down
                entry["details"] = {"error": f"{type(e).__name__}: {e}"}
        out.append(entry)
    return out


def plugin_report(manager) -> list[dict]:
    """The JSON document of `cera plugins --json`: one object per plugin, sorted by name.

    Each object has the keys the listing promises (name, distribution, version, status,
    error, registered) plus `backend_status`: for each backend the plugin registered,
    whether it is usable on this machine and, if not, why.
    """
    report = []
    for record in sorted(manager.records, key=lambda r: (r.name, r.distribution or "")):
        entry = record.to_json()
        entry["backend_status"] = _backend_status(manager, record.backends)
        report.append(entry)
    return report


def _registered_summary(entry: dict) -> str:
    parts = []
    for kind, items in entry["registered"].items():
        if items:
            parts.append(f"{kind}: {', '.join(items)}")
    return "; ".join(parts) or "-"


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)] + [r[-1]]
        lines.append("  ".join(cells).rstrip())
    return lines


@click.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array, one object per plugin.")
def plugins(as_json: bool) -> None:
    """List installed plugins and what each registered.

    For each plugin: its distribution and version, whether it loaded ("ok") or why not
    ("error"), and the backends, model architectures, audio components and commands it
    registered. For each backend: whether it is usable on this machine, and why not.
    """
    from cera.plugins.manager import PLUGINS_ENV, allowlist_from_env
    from cera_cli.main import plugin_manager

    manager = plugin_manager()
    report = plugin_report(manager)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return

    if report:
        rows = [("NAME", "DISTRIBUTION", "VERSION", "STATUS", "REGISTERED")]
        for e in report:
            rows.append((e["name"], e["distribution"] or "-", e["version"] or "-", e["status"], _registered_summary(e)))
        for line in _table(rows):
            click.echo(line)
    elif manager.allow == set():
        click.echo(f"No plugins loaded: plugins are disabled (--no-plugins, or {PLUGINS_ENV} is empty).")
    else:
        click.echo("No plugins loaded.")

    backends = [b for e in report for b in e["backend_status"]]
    if backends:
        click.echo("\nBackends:")
        rows = [(b["name"], "usable" if b["usable"] else f"not usable here: {b['reason']}") for b in backends]
        for line in _table(rows):
            click.echo("  " + line)
    elif manager.allow is None or manager.allow:
        from cera.plugins.distributions import no_backend_hint

        click.echo(f"\nNo backend is loaded: {no_backend_hint()}.")

    failed = [e for e in report if e["status"] != "ok"]
    if failed:
        click.echo("\nErrors (these plugins were skipped; everything else works):")
        for e in failed:
            where = f" ({e['distribution']} {e['version']})" if e["distribution"] else ""
            click.echo(f"  {e['name']}{where}: {e['error']}")

    if manager.skipped:
        names = ", ".join(sorted(n for n, _ in manager.skipped))
        click.echo(f"\nNot loaded because {PLUGINS_ENV} does not name them: {names}")
    unknown = manager.unknown_allowlist_names()
    if unknown and allowlist_from_env() is not None:
        click.echo(f"{PLUGINS_ENV} names {', '.join(unknown)}, which match no installed plugin or distribution.")
