"""Text analysis, the bottom layer that retrieval, the graph and extraction all use.

Pure of the database and of every other engram package (only Django settings and
config.exceptions): the embedder (embeddings), the local entity recogniser (recognise) and the
parser of the time windows a query names (temporal).
"""
