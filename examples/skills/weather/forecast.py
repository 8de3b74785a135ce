"""The weather skill's forecast entrypoint.

Reads {"city": ...} on stdin, asks the weather API for the day's
forecast and prints one line. The API is reached through the egress
proxy (HTTP_PROXY); the bearer token is WEATHER_TOKEN, which the proxy
swaps for the real secret on its way to the API's host.
"""

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

import wxformat

API = os.environ.get("WEATHER_API", "http://api.weather.test/v1")


def main():
    args = json.load(sys.stdin)
    city = args["city"]
    req = urllib.request.Request(
        API + "/forecast?" + urllib.parse.urlencode({"city": city}),
        headers={"Authorization": "Bearer " + os.environ.get("WEATHER_TOKEN", "")},
    )
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            forecast = json.load(resp)
    except urllib.error.HTTPError as e:
        print("weather: the API answered %d" % e.code, file=sys.stderr)
        return 1
    except OSError as e:
        print("weather: %s" % e, file=sys.stderr)
        return 1
    print(wxformat.line(city, forecast))
    return 0


if __name__ == "__main__":
    sys.exit(main())
