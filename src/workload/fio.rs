//! fio: job text, and parsing of fio JSON output.
