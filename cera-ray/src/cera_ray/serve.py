"""cera serve on Ray Serve: the same ASGI app, one loaded model and scheduler per replica.

Each replica builds `cera_serve.app.create_app` from a `ModelSpec` and loads its model in
the app's lifespan, so a replica counts as started only once its model is ready; Ray
Serve's health check asks the app and restarts a replica whose model failed to load.
Replicas, autoscaling and resources are Ray's deployment options, passed through as they
are (`num_replicas`, `autoscaling_config`, `ray_actor_options`, ...).

Back-pressure: every replica admits ``parallel`` running sequences and ``max_queue``
waiting ones (beyond: 429 with Retry-After, as `cera serve`). Ray's own limit of ongoing
requests per replica defaults to that sum, so Ray's router sends work to the replica that
has room instead of piling it on one, and its autoscaler sees the load.
"""

from __future__ import annotations

import os

from .spec import ModelSpec, RayConfigError

DEFAULT_NAME = "cera"


def deployment(spec=None, *, api_key: str | None = None, max_queue: int = 64, prompt_cache: str | None = None,
               name: str = DEFAULT_NAME, **deployment_options):  # fmt: skip
    """A Ray Serve deployment (not yet bound) serving ``spec``'s model over the OpenAI API.

    ``spec``: a `ModelSpec`, a model name/path, or a dict of its fields. ``api_key``: the
    key every route but /health needs (default: ``$CERA_API_KEY`` in the replica's
    environment, e.g. from ``runtime_env={"env_vars": ...}``). ``deployment_options`` go to
    ``serve.deployment`` (num_replicas, autoscaling_config, ray_actor_options,
    max_ongoing_requests, ...)."""
    from cera_serve.app import ServerConfig, create_app
    from ray import serve

    spec = ModelSpec.of(spec)
    if not isinstance(max_queue, int) or isinstance(max_queue, bool) or max_queue < 0:
        raise RayConfigError(f"max_queue must be an integer >= 0, got {max_queue!r}")
    if api_key is not None and (not isinstance(api_key, str) or not api_key):
        raise RayConfigError("api_key must be a non-empty string (or None to read $CERA_API_KEY in the replica)")

    def build_app():
        # runs in the replica: the key may come from the replica's own environment
        config = ServerConfig(
            model=spec.model, device=spec.device, threads=spec.threads, parallel=spec.parallel, n_ctx=spec.n_ctx,
            api_key=api_key or os.environ.get("CERA_API_KEY") or None, max_queue=max_queue,
            prompt_cache=prompt_cache,
        )  # fmt: skip
        return create_app(config)

    class CeraReplica:
        """One replica: the ASGI app of `cera serve`, its model loaded at start."""

        def check_health(self) -> None:
            server = self.app.state.server
            if server.status == "failed":
                raise RuntimeError(f"the model failed to load: {server.error}")

    options = dict(deployment_options)
    options.setdefault("max_ongoing_requests", spec.parallel + max_queue)
    # a replica asks Ray for the CPUs its threads will use, so Ray does not stack replicas
    # on one machine's cores
    options.setdefault("ray_actor_options", {"num_cpus": spec.threads or 1})
    try:
        return serve.deployment(name=name, **options)(serve.ingress(build_app)(CeraReplica))
    except (TypeError, ValueError) as e:
        raise RayConfigError(f"Ray Serve refused the deployment options {sorted(options)}: {e}") from None


def app(spec=None, **options):
    """A Ray Serve application to pass to ``serve.run``: `deployment` bound, no arguments."""
    return deployment(spec, **options).bind()


_INT_ARGS = ("threads", "parallel", "n_ctx", "max_queue", "num_replicas", "min_replicas", "max_replicas")


def build(args: dict):
    """An application builder for Ray's command line and config files:
    ``serve run cera_ray.serve:build model=smollm2-135m-instruct-q4_1 parallel=8``
    (every value arrives as a string; ``min_replicas``/``max_replicas`` turn on autoscaling)."""
    args = dict(args)
    for key in _INT_ARGS:
        if key in args and args[key] is not None:
            try:
                args[key] = int(args[key])
            except (TypeError, ValueError):
                raise RayConfigError(f"{key} must be an integer, got {args[key]!r}") from None
    spec = ModelSpec.of({k: args.pop(k) for k in ("model", "device", "threads", "parallel", "n_ctx") if k in args})
    lo, hi = args.pop("min_replicas", None), args.pop("max_replicas", None)
    if lo is not None or hi is not None:
        lo = 1 if lo is None else lo
        args["autoscaling_config"] = {"min_replicas": lo, "max_replicas": max(lo, hi or lo),
                                      "target_ongoing_requests": spec.parallel}  # fmt: skip
    known = {"api_key", "max_queue", "prompt_cache", "name", "num_replicas", "autoscaling_config"}
    unknown = sorted(set(args) - known)
    if unknown:
        raise RayConfigError(
            f"unknown argument(s) {unknown}; known: model, device, threads, parallel, n_ctx, min_replicas, "
            f"max_replicas, {', '.join(sorted(known))}"
        )
    return app(spec, **args)


__all__ = ["DEFAULT_NAME", "app", "build", "deployment"]
