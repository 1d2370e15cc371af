"""A Serve application for the RayService tests: its price comes from user_config."""

import os

from oxray import serve


@serve.deployment
class Fruit:
    def __init__(self, name: str):
        self.name = name
        self.price = 0

    def reconfigure(self, config):
        self.price = config.get("price", 0)

    def __call__(self, request):
        return {"fruit": self.name, "price": self.price, "pid": os.getpid()}


def build(args):
    return Fruit.bind(args.get("name", "mango"))
