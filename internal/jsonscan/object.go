package jsonscan

// EachField calls f with every key and value of the JSON object data, in order, after
// checking the whole object: false when data is not an object taken here (a key with an
// escape among them), or f said so. Values are exact (no surrounding space) sub-slices of
// data.
func EachField(data []byte, f func(key, value []byte) bool) bool {
	i := SkipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	type field struct{ k0, k1, v0, v1 int }
	var buf [16]field
	fields := buf[:0]
	i = SkipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		i++
	} else {
		for {
			if i >= len(data) || data[i] != '"' {
				return false
			}
			end, escaped, ok := ScanString(data, i)
			if !ok || escaped {
				return false
			}
			k0, k1 := i+1, end-1
			i = SkipSpace(data, end)
			if i >= len(data) || data[i] != ':' {
				return false
			}
			i = SkipSpace(data, i+1)
			v0 := i
			if i, ok = SkipValue(data, i, 1); !ok {
				return false
			}
			fields = append(fields, field{k0, k1, v0, i})
			i = SkipSpace(data, i)
			if i < len(data) && data[i] == ',' {
				i = SkipSpace(data, i+1)
				continue
			}
			if i < len(data) && data[i] == '}' {
				i++
				break
			}
			return false
		}
	}
	if SkipSpace(data, i) != len(data) {
		return false
	}
	for _, fd := range fields {
		if !f(data[fd.k0:fd.k1], data[fd.v0:fd.v1]) {
			return false
		}
	}
	return true
}

// EachElement calls f with every element of the JSON array data (a value SkipValue
// checked), in order, while f returns true.
func EachElement(data []byte, f func(v []byte) bool) bool {
	i := SkipSpace(data, 1)
	if data[i] == ']' {
		return true
	}
	for {
		v0 := i
		end, ok := SkipValue(data, i, 1)
		if !ok || !f(data[v0:end]) {
			return false
		}
		i = SkipSpace(data, end)
		if data[i] == ']' {
			return true
		}
		i = SkipSpace(data, i+1) // the comma
	}
}

// ObjectEnd is the index after the object that starts at data[i], found by counting
// brackets outside strings, up to maxDepth deep: a quick way to the end of an object whose
// content its own decoder checks.
func ObjectEnd(data []byte, i, maxDepth int) (int, bool) {
	if i >= len(data) || data[i] != '{' {
		return i, false
	}
	depth := 0
	for ; i < len(data); i++ {
		switch data[i] {
		case '"':
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			if depth++; depth > maxDepth {
				return i, false
			}
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1, true
			}
		}
	}
	return i, false
}
