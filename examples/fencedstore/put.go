package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/fencelock/fencelock/fence"
)

var httpClient = &http.Client{Timeout: 10 * time.Second}

func runPut(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("put", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	token := fs.String("token", os.Getenv("FENCELOCK_TOKEN"), "fencing `token` (default $FENCELOCK_TOKEN)")
	// Flags may follow URL VALUE.
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		if strings.HasPrefix(args[i], "-") && len(args[i]) > 1 {
			flags = append(flags, args[i])
			if !strings.Contains(args[i], "=") && i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
			continue
		}
		pos = append(pos, args[i])
	}
	if err := fs.Parse(flags); err != nil {
		return &exitError{2, fmt.Errorf("put: %v", err)}
	}
	if len(pos) != 2 {
		return &exitError{2, fmt.Errorf("put: want URL VALUE (run 'fencedstore help')")}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, pos[0], strings.NewReader(pos[1]))
	if err != nil {
		return &exitError{2, fmt.Errorf("put: %v", err)}
	}
	if *token != "" {
		req.Header.Set(fence.Header, *token)
	}
	return send(req, stdout)
}

func runGet(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return &exitError{2, fmt.Errorf("get: want URL (run 'fencedstore help')")}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, args[0], nil)
	if err != nil {
		return &exitError{2, fmt.Errorf("get: %v", err)}
	}
	return send(req, stdout)
}

// send prints a 2xx answer's body; anything else is a one-line error.
func send(req *http.Request, stdout io.Writer) error {
	resp, err := httpClient.Do(req)
	if err != nil {
		return &exitError{3, fmt.Errorf("%s %s: %v", req.Method, req.URL, err)}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 == 2 {
		_, err := stdout.Write(body)
		return err
	}
	var reason struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &reason) == nil && reason.Error != "" {
		msg = reason.Code + ": " + reason.Error
	}
	code := 1
	if resp.StatusCode >= 500 {
		code = 3
	} else if resp.StatusCode == 400 {
		code = 2
	}
	return &exitError{code, fmt.Errorf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, msg)}
}
