"""Errors of the Slurm-over-SSH layer; each message says which host, job, command or path failed."""

from __future__ import annotations


class SlurmError(Exception):
    """Base of every error this package raises."""


class SlurmConnectionError(SlurmError):
    """The SSH connection could not be opened or broke (unreachable host, wrong key, unknown host key)."""


class SlurmCommandError(SlurmError):
    """A remote command exited non-zero (e.g. slurmctld down: "Unable to contact slurm controller")."""

    def __init__(
        self, message: str, *, command: str = "", exit_status: int | None = None, stderr: str = ""
    ) -> None:
        super().__init__(message)
        self.command = command
        self.exit_status = exit_status
        self.stderr = stderr


class SlurmSubmitError(SlurmCommandError):
    """sbatch refused the job (bad account, partition, impossible resources, missing script)."""


class SlurmSubmitLimitError(SlurmSubmitError):
    """sbatch refused the job for a submit limit (QOSMaxSubmitJobPerUserLimit...): retry later."""


class SlurmParseError(SlurmError):
    """A Slurm command printed something this package cannot read; the message quotes it."""

    def __init__(self, message: str, raw: str) -> None:
        super().__init__(f"{message}: {_quote(raw)}")
        self.raw = raw


class RemotePathNotFoundError(SlurmError):
    """A remote file or folder does not exist."""

    def __init__(self, path: str, host: str = "") -> None:
        super().__init__(f"remote path not found: {path}" + (f" on {host}" if host else ""))
        self.path = path


def _quote(raw: str, limit: int = 500) -> str:
    text = raw if len(raw) <= limit else raw[:limit] + f"... ({len(raw)} chars)"
    return repr(text)
