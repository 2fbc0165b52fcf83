"""Stand-in for IPython on the device machine (matplotlib reads ``version_info`` when IPython is imported)."""

version_info = (9, 0, 0)


def get_ipython():
    return None
