"""A TCP proxy that holds every byte back by a fixed delay in each direction, in order: a
link with latency where the kernel has no netem.

Usage: python delay_proxy.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT DELAY_MS
Prints "ready" once it listens."""

import asyncio
import sys


async def carry(reader, writer, delay):
    """Reads as bytes come and writes each chunk `delay` seconds after it arrived; the end
    of the reading side ends the writing side (a half-close, the other way goes on)."""
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()

    async def deliver():
        while True:
            due, data = await queue.get()
            await asyncio.sleep(max(0.0, due - loop.time()))
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    delivering = asyncio.create_task(deliver())
    try:
        while True:
            data = await reader.read(1 << 16)
            await queue.put((loop.time() + delay, data))
            if not data:
                break
        await delivering
    except (ConnectionError, OSError):
        delivering.cancel()


async def main(listen_host, listen_port, target_host, target_port, delay_ms):
    delay = delay_ms / 1000

    async def link(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection(target_host, target_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(carry(client_reader, server_writer, delay), carry(server_reader, client_writer, delay),
                             return_exceptions=True)
        for writer in (client_writer, server_writer):
            writer.close()

    server = await asyncio.start_server(link, listen_host, listen_port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    host, port, target, target_port, delay_ms = sys.argv[1:]
    asyncio.run(main(host, int(port), target, int(target_port), float(delay_ms)))
