"""Start cosyedge: one server on port 7860 with the Gradio page and the REST API.

    python app.py                          # http://127.0.0.1:7860, this machine only
    COSYEDGE_AUTH=user:pw python app.py --host 0.0.0.0   # on the LAN, with credentials
    python app.py --wyoming-port 10200     # also a Wyoming TTS server (Home Assistant), loopback only
    python app.py --wyoming-port 10200 --wyoming-host 0.0.0.0 --wyoming-allow 192.168.1.20

Nothing heavy happens here: the engine loads on the first job and is released when idle.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys
from typing import TYPE_CHECKING

from cosyedge.config import Settings, SettingsError, add_arguments, from_args

if TYPE_CHECKING:
    from fastapi import FastAPI

    from cosyedge.web.wyoming_server import WyomingServer, WyomingSettings

    from cosyedge.ops.janitor import Janitor
    from cosyedge.service.jobs import ThermalSource
    from cosyedge.service.facade import Service

logger = logging.getLogger("cosyedge.app")


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and "localhost"."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(settings: Settings) -> None:
    """Refuse to serve the LAN without credentials unless the user explicitly opted out."""
    if is_loopback(settings.host) or settings.auth:
        return
    if settings.insecure_no_auth:
        logger.warning("serving %s WITHOUT credentials (--insecure-no-auth): anyone on the network "
                       "can use this box", settings.host)
        return
    raise SettingsError(f"host {settings.host} exposes the app on the network: set "
                        "COSYEDGE_AUTH=user:password, or pass --insecure-no-auth to serve without "
                        "credentials")


def wyoming_settings(args: argparse.Namespace) -> "WyomingSettings | None":
    """The Wyoming server's settings from the flags (or COSYEDGE_WYOMING_*), None when it is off.

    Wyoming has no authentication: a host other than loopback needs an allow-list of client
    addresses, or the server is not started at all."""
    from cosyedge.web.wyoming_server import WyomingSettings

    port = args.wyoming_port if args.wyoming_port is not None else os.environ.get("COSYEDGE_WYOMING_PORT")
    if port in (None, ""):
        return None
    try:
        port = int(port)
    except ValueError:
        raise SettingsError(f"--wyoming-port {port!r} must be a port number") from None
    if not 1 <= port <= 65535:
        raise SettingsError(f"--wyoming-port {port} must be 1-65535")
    host = args.wyoming_host or os.environ.get("COSYEDGE_WYOMING_HOST") or "127.0.0.1"
    allow_text = args.wyoming_allow if args.wyoming_allow is not None else os.environ.get(
        "COSYEDGE_WYOMING_ALLOW", "")
    allow = tuple(a.strip() for a in allow_text.split(",") if a.strip())
    for entry in allow:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise SettingsError(f"--wyoming-allow: {entry!r} is not an IP address or network") from None
    if not is_loopback(host) and not allow:
        raise SettingsError(f"--wyoming-host {host} opens the Wyoming server (which has no "
                            "authentication) to the network: name the clients that may use it with "
                            "--wyoming-allow ADDRESS[,ADDRESS...] (e.g. your Home Assistant's address)")
    return WyomingSettings(port=port, host=host, allow=allow)


def start_wyoming(service: "Service", settings: "WyomingSettings | None") -> "WyomingServer | None":
    """The Wyoming TTS server on the same service (queue, thermal limits, model), when asked for."""
    if settings is None:
        return None
    from cosyedge.web.wyoming_server import WyomingServer

    return WyomingServer(service, settings).start()


def upload_cache_dir() -> str:
    """Where the page's Gradio keeps uploads, recordings and result copies (GRADIO_TEMP_DIR)."""
    from gradio.utils import get_upload_folder

    return get_upload_folder()


def build_app(service: "Service", with_ui: bool = True, janitor: "Janitor | None" = None) -> "FastAPI":
    """REST routes, then the Gradio page mounted at "/", wrapped in auth when configured. The page's
    upload route is refused while the disk is nearly full and, with a ``janitor``, followed by a
    sweep of the upload cache (cosyedge/web/upload_guard.py)."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from cosyedge.web.api import create_api

    settings = service.settings
    app = create_api(service)
    if with_ui:
        import gradio as gr

        from cosyedge.web.ui import PAGE_CSS, build_ui, queue_settings, theme

        demo = build_ui(service)
        demo.queue(**queue_settings(service))
        app = gr.mount_gradio_app(app, demo, path="/", theme=theme(), css=PAGE_CSS, ssr_mode=False,
                                  footer_links=[], mcp_server=False, pwa=False,
                                  max_file_size=int(settings.max_upload_mb * 1024 * 1024),
                                  allowed_paths=[str(settings.outputs_path.resolve())],
                                  enable_monitoring=False)
        from cosyedge.web.upload_guard import UploadGuardMiddleware

        service.disk.watch(upload_cache_dir())
        app.add_middleware(UploadGuardMiddleware, check_room=lambda: service.check_room("an upload"),
                           after_upload=janitor.sweep_uploads if janitor is not None else lambda: None)
    if settings.auth:
        from cosyedge.web.auth import BasicAuthMiddleware

        app.add_middleware(BasicAuthMiddleware, credentials=settings.auth)
    return app


def make_service(settings: Settings, thermal: "ThermalSource | None" = None) -> "Service":
    """The service with the real engine loader (lazy) and its idle-unload thread started."""
    from cosyedge.service.facade import Service

    service = Service(settings, thermal=thermal)
    service.start()
    return service


def start_janitor(settings: Settings, service: "Service", uploads_dir: str | None = None) -> "Janitor":
    """The janitor thread: sweeps outputs/ (and the page's upload cache, ``uploads_dir``) at start
    and every few minutes, sparing files in use."""
    from cosyedge.ops.janitor import Janitor

    return Janitor.from_settings(settings, in_use=service.in_use_paths, uploads_dir=uploads_dir).start()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from cosyedge.service.requests import QUALITY_NAMES

    parser = argparse.ArgumentParser(prog="python app.py", description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--insecure-no-auth", dest="insecure_no_auth", action="store_true",
                        default=None, help="serve a non-local --host without credentials (warns)")
    parser.add_argument("--max-text-chars", dest="max_text_chars", type=int)
    parser.add_argument("--quality", metavar="MODE",
                        help=f"CosyVoice speed mode of requests that name none: {', '.join(QUALITY_NAMES)} "
                             "(default exact = upstream; env COSYEDGE_QUALITY; also OpenAI and Wyoming clients)")
    parser.add_argument("--wyoming-port", dest="wyoming_port",
                        help="also serve the Wyoming TTS protocol on this port (Home Assistant; "
                             "env COSYEDGE_WYOMING_PORT; off by default)")
    parser.add_argument("--wyoming-host", dest="wyoming_host",
                        help="address the Wyoming server binds (default 127.0.0.1; env COSYEDGE_WYOMING_HOST)")
    parser.add_argument("--wyoming-allow", dest="wyoming_allow", metavar="ADDRESSES",
                        help="comma-separated client addresses or networks the Wyoming server answers "
                             "besides loopback; required with a non-loopback --wyoming-host "
                             "(env COSYEDGE_WYOMING_ALLOW)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        settings = from_args(args)
        logging.basicConfig(level=settings.log_level.upper(),
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        check_exposure(settings)
        from cosyedge.service.request_path import check_quality_setting

        check_quality_setting(settings)
        wyoming = wyoming_settings(args)
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import uvicorn

    from cosyedge.web.api import install_log_redaction
    from cosyedge.host.thermal import ThermalGovernor

    service = make_service(settings, ThermalGovernor.from_settings(settings))
    janitor = start_janitor(settings, service, uploads_dir=upload_cache_dir())
    try:
        wyoming_server = start_wyoming(service, wyoming)
    except OSError as exc:
        print(f"error: cannot start the Wyoming server on port {wyoming.port}: {exc}", file=sys.stderr)
        janitor.stop()
        service.close()
        return 2
    app = build_app(service, janitor=janitor)
    logger.info("cosyedge on http://%s:%d (model %s loads on the first job)", settings.host,
                settings.port, settings.model)
    install_log_redaction()  # the live player's stream token must not reach the access log
    try:
        uvicorn.run(app, host=settings.host, port=settings.port,
                    log_level=settings.log_level.lower(), timeout_graceful_shutdown=5)
    finally:
        if wyoming_server is not None:
            wyoming_server.stop()
        janitor.stop()
        service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
