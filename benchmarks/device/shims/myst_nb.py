"""Stand-in for myst_nb on the device machine: ``glue`` prints each scalar as a ``GLUE name = value`` line."""


def glue(name, value, display=True):
    text = getattr(value, "data", value)
    if isinstance(text, (int, float, str, bool)) or text is None:
        print(f"GLUE {name} = {str(text)[:300]}", flush=True)
