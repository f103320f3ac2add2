"""The SimPy engine: runs one program per rank over streams and links (flows, SM sharing,
mailboxes, the record log). The only package that imports SimPy."""
