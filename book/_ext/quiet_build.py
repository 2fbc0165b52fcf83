"""Keep progress bars out of the rendered pages, and give the kernels the chapters' environment.

The build's kernels inherit this process's environment, so ``ICL_PROGRESS=0`` set here turns off the training
loops' bars (``icl_utils.config.show_progress``) in every notebook the build executes, while Jupyter, where the
variable is unset, still shows them. Anything else written to stderr is a warning of myst-nb's
(``nb_output_stderr: warn`` in ``_config.yml``), and under ``-W`` a failed build. The kernels also get
``icl_utils.config.chapter_env`` (the C library's memory settings that make the chapters faster, and less
spinning of the OpenMP threads when the machine is busy as each notebook starts).
"""

from __future__ import annotations

import os

from icl_utils.config import BUSY_ENV, CHAPTER_ENV, chapter_env


def setup(app):
    os.environ["ICL_PROGRESS"] = "0"
    original = dict(os.environ)

    def before_kernel(app, docname, source) -> None:
        # myst-nb starts a notebook's kernel, with this process's environment, right after this event
        if not docname.startswith("notebooks/"):
            return
        env = chapter_env(original)
        for name in (*CHAPTER_ENV, *BUSY_ENV):  # only these: the rest of the environment is left as it is
            if name in env:
                os.environ[name] = env[name]
            else:
                os.environ.pop(name, None)

    app.connect("source-read", before_kernel)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
