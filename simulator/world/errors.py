"""The world's one exception: bad world YAML or bad arguments to the engine."""


class WorldError(ValueError):
    """A world file or an argument is out of range; the message names the field in backticks,
    the value, and the fix. The bridge (`simulator.worlds`) turns it into lambdadnn's
    `InstanceError`, so the world itself depends on nothing outside this package."""


def shown(value: object, limit: int = 40) -> str:
    """`value` for a message: short, and a container named by its kind, never walked (an alias
    bomb in YAML builds a structure whose text would be gigabytes)."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple, set)):
        return f"a {type(value).__name__}"
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def shown_path(path: object, limit: int = 80) -> str:
    """A file's path for a message, cut from the left when long: the name stays readable."""
    text = repr(str(path))
    return text if len(text) <= limit else f"…{text[len(text) - limit + 1:]}"


def clipped(text: str, limit: int = 80) -> str:
    """`text` (a field's name, a label) as it is when printable, else `repr`-escaped (a
    message stays one line), cut to `limit` characters."""
    if not text.isprintable():
        return shown(text, limit)
    return text if len(text) <= limit else f"{text[: limit - 1]}…"
