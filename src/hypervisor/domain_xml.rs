//! Domain XML from typed structs; every value escaped by the serializer.
