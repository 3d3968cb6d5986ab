"""The web layer: the aiohttp application, its route table, the request pipeline, the ops endpoints,
the status page and the admin API. It composes everything below it; nothing below imports it."""
