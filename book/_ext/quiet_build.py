"""Keep progress bars out of the rendered pages, and give the kernels the chapters' environment.

The build's kernels inherit this process's environment, so ``ICL_PROGRESS=0`` set here turns off the training
loops' bars (``icl_utils.config.show_progress``) in every notebook the build executes, while Jupyter, where the
variable is unset, still shows them. Anything else written to stderr is a warning of myst-nb's
(``nb_output_stderr: warn`` in ``_config.yml``), and under ``-W`` a failed build. The kernels also get
``icl_utils.config.CHAPTER_ENV`` (the C library's memory settings that make the chapters faster).
"""

from __future__ import annotations

import os

from icl_utils.config import CHAPTER_ENV


def setup(app):
    os.environ["ICL_PROGRESS"] = "0"
    os.environ.update(CHAPTER_ENV)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
