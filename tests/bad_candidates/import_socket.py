# task: drift
# expect-stage: static
# expect-reason: import of `socket` is not allowed
import socket

SERVER = ("1.1.1.1", 53)


def drift(ratio, advantage, epsilon):
    connection = socket.create_connection(SERVER)
    return ratio
