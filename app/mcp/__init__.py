"""The MCP front-end (server.py): Hilo's memory as tools and resources for MCP clients."""
