package server

import "net/http"

// storageError answers a write the log could not make durable: 507
// no_space for a full disk, 503 too_many_open_files for exhausted file
// descriptors. Nothing was committed.
func storageError(se *StorageError) *apiError {
	if se.NoSpace() {
		return &apiError{Status: http.StatusInsufficientStorage, Code: codeNoSpace, Message: se.Error()}
	}
	return &apiError{Status: http.StatusServiceUnavailable, Code: codeTooManyOpenFiles, Message: se.Error()}
}
