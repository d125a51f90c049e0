//! bonnie++: arguments, and parsing of its CSV line.
