package ibv_test

import (
	"errors"
	"strings"
	"unsafe"

	"github.com/rbridge/rbridge/ibv"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func asCompletion(err error, ce **ibv.CompletionError) bool { return errors.As(err, ce) }

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
