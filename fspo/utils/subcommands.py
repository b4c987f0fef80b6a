"""The dispatcher the `fspo` command and `fspo data` share: a name picks a command, the rest is its argv.

A command is ``(runner, one line of help)``. The runner is a module name, whose ``main(argv) -> int`` is
imported only when the command runs (so that `fspo verify` does not pay for importing verl and Ray), or a
callable taking ``argv``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from collections.abc import Callable, Mapping

from fspo.config.environment import EnvironmentVariableError, check_environment
from fspo.utils.arguments import SettingFailure, refuse
from fspo.utils.input_files import InputFileError

Command = tuple[str | Callable[[list[str]], int | None], str]


def usage(prog: str, commands: Mapping[str, Command], noun: str = "command") -> str:
    width = max(len(name) for name in commands) + 1
    lines = [f"usage: {prog} <{noun}> [args]" + ("  |  fspo --version" if prog == "fspo" else ""), "", f"{noun}s:"]
    lines += [f"  {name:<{width}} {help_}" for name, (_, help_) in commands.items()]
    return "\n".join(lines)


def dispatch(prog: str, commands: Mapping[str, Command], argv: list[str] | None, noun: str = "command") -> int:
    """Run the command named by ``argv[0]`` with the rest of ``argv``; its exit status.

    ``-h``/``--help`` prints the commands (0); no name or an unknown one prints them on stderr (2), as argparse
    does for a missing argument. ``--version`` anywhere prints fspo's version and runs nothing (0).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--version" in argv:
        print(f"fspo {importlib.metadata.version('fspo')}")
        return 0
    if argv[:1] in (["-h"], ["--help"]):
        print(usage(prog, commands, noun))
        return 0
    if not argv:
        print(f"{prog}: name a {noun}\n\n{usage(prog, commands, noun)}", file=sys.stderr)
        return 2
    name, rest = argv[0], argv[1:]
    if name not in commands:
        print(f"{prog}: unknown {noun} {name!r}\n\n{usage(prog, commands, noun)}", file=sys.stderr)
        return 2
    try:
        check_environment()  # a bad FSPO_* value refused before the command writes anything
    except EnvironmentVariableError as error:
        return refuse(f"{prog} {name}", error)
    runner = commands[name][0]
    run = importlib.import_module(runner).main if isinstance(runner, str) else runner
    # Lazy like the commands: fspo.utils.output_dir is small, but `fspo --help` needs none of it.
    from fspo.utils.output_dir import OutputConflict, release_output_folders

    try:
        return int(run(rest) or 0)
    # Any command's input file or output folder, or a setting it cannot go on under.
    except (InputFileError, OutputConflict, SettingFailure) as error:
        return refuse(f"{prog} {name}", error)
    finally:
        release_output_folders()  # the output folders this command claimed: their locks end with it
