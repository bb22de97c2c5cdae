"""The MCP server: the engine's simulator, checker and optimizer as tools for coding agents.

A thin layer over the same engine the CLI and the language server use: tool arguments become a
`KernelSource`, a `Task` and the engine's options; the engine's pydantic models become the tools'
structured results. No optimisation logic lives here.
"""
