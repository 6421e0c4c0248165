"""Retriever adapters over the typed client: LangChain's and LlamaIndex's BaseRetriever. Each is an
optional extra (`pip install governed-gateway[langchain]`, `[llamaindex]`); this package imports
neither framework, only the module of the one you use does.

Both turn an item into the framework's document the same way: its text, and metadata that a chain
or an agent can cite and weigh (`item_metadata`, in shared.py). Both take a number of results, each
under its framework's name (LangChain's `k`, LlamaIndex's `similarity_top_k`): `count` checks it."""
