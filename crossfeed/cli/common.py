"""What every subcommand shares: settings from --config, clean errors, exit codes."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from crossfeed.config import ConfigError, Settings, load_settings

F = TypeVar("F", bound=Callable[..., Any])

EXIT_ERROR = 1
EXIT_NOT_IMPLEMENTED = 2

err_console = Console(stderr=True)
out_console = Console()


class State:
    """Options given before the subcommand (``crossfeed --config F ...``)."""

    config: str | None = None
    log_format: str | None = None


def settings(**overrides: Any) -> Settings:
    return load_settings(State.config, log_format=State.log_format, **overrides)


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    # escape: messages quote user input and pip extras ("crossfeed[sorter]"), not markup.
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def not_implemented(what: str) -> NoReturn:
    err_console.print(f"{what}: not implemented yet", highlight=False)
    raise typer.Exit(EXIT_NOT_IMPLEMENTED)


def clean_errors(func: F) -> F:
    """Known errors become one readable line and exit code 1, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ConfigError as err:
            fail(str(err))
        except KeyboardInterrupt:
            err_console.print("interrupted")
            sys.exit(130)

    return wrapper  # type: ignore[return-value]
