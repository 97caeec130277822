"""Rendering a job's sbatch template: ``str.format`` over the whole file, as AutoExperiment does."""

from __future__ import annotations

from pathlib import Path

from autoexp.config.errors import ConfigError
from autoexp.config.job import Job
from autoexp.config.substitute import close_matches, field_names, head_name, unsafe_field

_TEMPLATE_CACHE: dict[tuple[Path, int, int], str] = {}


def shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it (shorter messages)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def read_template(job: Job) -> str:
    """The template text of ``job`` (cached by path, size and mtime)."""
    if job.template is None:
        raise ConfigError(str(job.config_path), 1, "template", f"job {job.name} has no template")
    try:
        stat = job.template.stat()
        key = (job.template, stat.st_size, stat.st_mtime_ns)
        text = _TEMPLATE_CACHE.get(key)
        if text is None:
            text = job.template.read_text(encoding="utf-8")
            _TEMPLATE_CACHE[key] = text
        return text
    except (OSError, UnicodeDecodeError) as exc:
        where, line = job.origin("template").rsplit(":", 1) if "template" in job.lines else (job.source, "1")
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(
            where, int(line), "template", f"cannot read template {job.template}: {reason}"
        ) from None


def render(job: Job) -> str:
    """The rendered script: the template formatted with every param (literal braces are doubled)."""
    text = read_template(job)
    try:
        return text.format_map(dict(job.params)) if not unsafe_field(text) else _fail(job, text)
    except (KeyError, IndexError, ValueError, AttributeError, TypeError):
        return _fail(job, text)


def _fail(job: Job, text: str) -> str:
    """Locate the first line of the template that cannot be formatted and raise a ConfigError."""
    assert job.template is not None
    file = shown(job.template)
    for number, line in enumerate(text.splitlines(), start=1):
        why = unsafe_field(line)
        if why:
            raise ConfigError(file, number, "", why)
        try:
            line.format_map(dict(job.params))
        except KeyError:
            for field in field_names(line):
                head = head_name(field, job.params)
                if head is not None and head not in job.params:
                    hint = close_matches(head, job.params)
                    raise ConfigError(
                        file,
                        number,
                        "",
                        f"unresolved placeholder {{{field}}} (job {job.name}){hint}; "
                        "write {{ and }} for literal braces",
                    ) from None
            raise ConfigError(file, number, "", f"cannot render this line (job {job.name})") from None
        except (IndexError, ValueError, AttributeError, TypeError) as exc:
            raise ConfigError(
                file,
                number,
                "",
                f"cannot render this line: {exc} (job {job.name}); write {{{{ and }}}} for literal braces",
            ) from None
    # Every line renders alone, so a field spans lines: str.format sees one unbalanced brace.
    raise ConfigError(
        file, 1, "", f"template cannot be rendered (job {job.name}); unbalanced braces across lines"
    )


def check_job_name_line(job: Job, script: str) -> None:
    """AutoExperiment's build asserts ``#SBATCH --job-name=<name>``; re-attaching by name relies on it."""
    if f"#SBATCH --job-name={job.name}" not in script:
        raise ConfigError(
            shown(job.template) if job.template else job.source,
            1,
            "",
            f"the rendered script lacks the line '#SBATCH --job-name={job.name}' "
            "(write '#SBATCH --job-name={name}' in the template)",
        )
