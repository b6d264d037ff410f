// A minimal libcni runner for xwire's tests: `cnitool add|check|del CONFLIST NETNS`,
// with CNI_CONTAINERID, CNI_ARGS (K=V;K=V), CNI_PATH and CNI_CACHE_DIR from the
// environment. Debian packages libcni but not a cnitool binary, so the test builds this
// against /usr/share/gocode (GOPATH mode, offline).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: cnitool add|check|del CONFLIST NETNS")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[2])
	if err != nil {
		exit(err)
	}
	list, err := libcni.ConfListFromBytes(raw)
	if err != nil {
		exit(err)
	}
	var args [][2]string
	for _, pair := range strings.Split(os.Getenv("CNI_ARGS"), ";") {
		if kv := strings.SplitN(pair, "=", 2); len(kv) == 2 {
			args = append(args, [2]string{kv[0], kv[1]})
		}
	}
	runtime := &libcni.RuntimeConf{
		ContainerID: os.Getenv("CNI_CONTAINERID"),
		NetNS:       os.Args[3],
		IfName:      "eth0",
		Args:        args,
	}
	cni := libcni.NewCNIConfigWithCacheDir(filepath.SplitList(os.Getenv("CNI_PATH")), os.Getenv("CNI_CACHE_DIR"), nil)
	ctx := context.Background()
	switch os.Args[1] {
	case "add":
		result, err := cni.AddNetworkList(ctx, list, runtime)
		if err != nil {
			exit(err)
		}
		json.NewEncoder(os.Stdout).Encode(result)
	case "check":
		err = cni.CheckNetworkList(ctx, list, runtime)
	case "del":
		err = cni.DelNetworkList(ctx, list, runtime)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		exit(err)
	}
}

func exit(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
