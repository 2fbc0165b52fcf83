"""Stand-in for IPython.display on the device machine: the chapters' ``Markdown`` and ``display``."""


class Markdown:
    def __init__(self, data=""):
        self.data = data


def display(*objs, **kwargs):
    for obj in objs:
        print(getattr(obj, "data", obj))
