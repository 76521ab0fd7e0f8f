"""`veri-tui serve [--host 127.0.0.1] [--port N] [--allow-remote] [--allow-short-token]`.

The app in a browser. Checks the bind before anything is started: a loopback address (the
default) gets a fresh random token; any other address needs `--allow-remote` and a token
the user set in $VERI_SERVE_TOKEN, or it is refused in one line (exit 2). A token of the
user's own shorter than 24 characters is refused too, on loopback unless
`--allow-short-token`. The server and its token live in
veri_tui.web.
"""

from __future__ import annotations

import argparse
import os

from veri_tui.errors import VeriError


def run(args: argparse.Namespace) -> int:
    """Serve the app until interrupted; exit status."""
    from veri_tui.web.auth import TOKEN_ENV, check_bind, is_loopback, new_token

    if not 0 <= args.port <= 65535:
        raise VeriError(f"{args.port} is not a TCP port (0-65535; 0 picks a free one)", "--port")
    user_token = os.environ.get(TOKEN_ENV) or None
    check_bind(args.host, args.port, args.allow_remote, user_token, args.allow_short_token)
    from veri_tui.web.server import serve  # aiohttp and textual-serve: only past the checks

    try:
        return serve(args.host, args.port, user_token or new_token(), is_loopback(args.host))
    except OSError as exc:  # the port is taken, the address is not this machine's, ...
        why = exc.strerror or str(exc)
        raise VeriError(f"cannot listen on {args.host}:{args.port}: {why}", "--port") from None
