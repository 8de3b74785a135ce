"""wxformat: one line of text for a forecast."""

__version__ = "1.0"


def line(city, forecast):
    """Returns "City: summary, low-high C" for the API's forecast."""
    return "%s: %s, %d-%d C" % (
        city,
        forecast["summary"],
        round(forecast["low"]),
        round(forecast["high"]),
    )
