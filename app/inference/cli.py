"""``memscale inference serve``: run the inference tier as its own process.

The project's main CLI registers the group with ``main.add_command(inference)``; the module
also runs alone: ``python -m app.inference.cli serve``. Configuration is read here, at
start-up: ``MEMSCALE_INFERENCE_MODEL`` (a local checkpoint folder; default: the bundled
SmolLM2-135M-Instruct, converted once under the data dir) and ``MEMSCALE_DATA_DIR``
(default ``./.memscale``; chunk KVs go to ``<data_dir>/kv``).
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
from pathlib import Path

import click

inference = click.Group("inference", help="The KV-cache inference tier (CacheBlend, chunk KV store).")


def _load_factory(spec: str):
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise click.BadParameter("expected 'package.module:function'", param_hint="--cartridge-resolver")
    return getattr(importlib.import_module(module), attr)


@inference.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Listen address (loopback by default).")
@click.option("--port", default=8100, show_default=True, type=int)
@click.option("--model", "model_path", default=None, help="Checkpoint folder (default: $MEMSCALE_INFERENCE_MODEL).")
@click.option("--data-dir", default=None, help="Data folder (default: $MEMSCALE_DATA_DIR or ./.memscale).")
@click.option("--threads", default=None, type=int, help="torch intra-op threads.")
# The CacheBlend options default to None: whatever is not given comes from BlendConfig(), the one
# place the defaults live (and are argued for), so the server and the engine cannot disagree.
@click.option(
    "--recompute-ratio",
    default=None,
    type=click.FloatRange(0.0, 1.0),
    help="Share of chunk tokens recomputed [default: BlendConfig's].",
)
@click.option(
    "--selection",
    default=None,
    type=click.Choice(["query", "chunk_start", "deviation"]),
    help="CacheBlend token selection: --start-share of the budget on the first tokens of each chunk, the "
    "rest on the tokens the request's prompt attends to over its first --query-layers layers; only the "
    "chunk starts (EPIC); or KV deviation at --check-layer [default: BlendConfig's].",
)
@click.option("--check-layer", default=None, type=click.IntRange(1))
@click.option("--query-layers", default=None, type=click.IntRange(1))
@click.option("--start-share", default=None, type=click.FloatRange(0.0, 1.0))
@click.option("--mem-gb", default=2.0, show_default=True, type=float, help="RAM tier limit of the chunk KV store.")
@click.option("--disk-gb", default=20.0, show_default=True, type=float, help="Disk tier limit of the chunk KV store.")
@click.option(
    "--cartridge-resolver",
    default=None,
    help="'module:factory' where factory(engine) returns resolve_cartridges(ids) -> prefix_kv "
    "(default: the cartridges trained by the service, under <data dir>/cartridges).",
)
def serve(
    *,
    host,
    port,
    model_path,
    data_dir,
    threads,
    recompute_ratio,
    selection,
    check_layer,
    query_layers,
    start_share,
    mem_gb,
    disk_gb,
    cartridge_resolver,
):
    """Serve /healthz, /v1/chunks and /v1/generate."""
    import uvicorn

    from app.inference.blend import BlendConfig
    from app.inference.engine import EngineConfig, config_from_env
    from app.inference.server import ServerConfig, create_app

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # uvicorn handles SIGTERM during serving and re-raises it on exit; this handler makes that
    # (and a SIGTERM during start-up) a clean exit instead of a kill.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))

    env = dict(os.environ)
    if data_dir:
        env["MEMSCALE_DATA_DIR"] = data_dir
    if model_path:
        env["MEMSCALE_INFERENCE_MODEL"] = model_path
    base = config_from_env(env)
    engine_cfg = EngineConfig(model_path=base.model_path, threads=threads)
    config = ServerConfig(
        engine=engine_cfg,
        store_root=Path(env.get("MEMSCALE_DATA_DIR", "./.memscale")) / "kv",
        mem_bytes=int(mem_gb * 2**30),
        disk_bytes=int(disk_gb * 2**30),
        blend=BlendConfig(
            **{
                k: v
                for k, v in {
                    "check_layer": check_layer,
                    "recompute_ratio": recompute_ratio,
                    "selection": selection,
                    "query_layers": query_layers,
                    "start_share": start_share,
                }.items()
                if v is not None
            }
        ),
    )
    if cartridge_resolver:
        factory = _load_factory(cartridge_resolver)
    else:
        from app.inference.cartridge import directory_resolver_factory

        factory = directory_resolver_factory(Path(env.get("MEMSCALE_DATA_DIR", "./.memscale")) / "cartridges")
    from app.kit.runtime.signing import load_key

    # The shared secret of the two tiers: MEMSCALE_INFERENCE_KEY, else <data_dir>/inference.key.
    key = load_key(Path(env.get("MEMSCALE_DATA_DIR", "./.memscale")), env.get("MEMSCALE_INFERENCE_KEY"))
    app = create_app(config, cartridge_resolver_factory=factory, key=key)
    uvicorn.run(app, host=host, port=port, log_level="info")


if __name__ == "__main__":
    inference()
