//! FlatBuffers schemas and their generated code.
