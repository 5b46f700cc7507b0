package redisfence

import "strings"

// Slot is the Redis Cluster hash slot of key (0..16383): CRC16 (XMODEM)
// of the key, or of its hash tag, the part between the first '{' and the
// first '}' after it when that is not empty, modulo 16384. Keys with the
// same tag are in the same slot, which a script's keys must be.
func Slot(key string) int {
	if tag, ok := hashTag(key); ok {
		key = tag
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// hashTag is key's hash tag: the part between its first '{' and the
// first '}' after it, when that is not empty.
func hashTag(key string) (string, bool) {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j], true
		}
	}
	return "", false
}
