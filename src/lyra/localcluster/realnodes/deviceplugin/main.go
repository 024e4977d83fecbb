// Command lyra-fake-gpu is Lyra's fake GPU device plugin for the local cluster's real nodes.
//
// It speaks the kubelet's device-plugin API (v1beta1): it registers nvidia.com/gpu with the kubelet, lists
// -count healthy devices named <node>-gpu-<i>, and on Allocate hands the container NVIDIA_VISIBLE_DEVICES with the
// ids the kubelet chose, as NVIDIA's plugin does. The kubelet itself then does the accounting: a pod asking more
// GPUs than the node has is refused at admission. When the kubelet restarts it removes the plugin sockets; the
// plugin then exits (non-zero) so that whoever runs it sees it.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-stream.Context().Done() // the devices never change
	return nil
}

func (p *plugin) Allocate(_ context.Context, request *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	response := &pluginapi.AllocateResponse{}
	for _, container := range request.ContainerRequests {
		response.ContainerResponses = append(response.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(container.DevicesIds, ",")},
		})
	}
	return response, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "lyra-fake-gpu: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	count := flag.Int("count", 0, "number of fake GPUs to advertise (at least 1)")
	node := flag.String("node", "", "node name, the prefix of the device ids")
	resource := flag.String("resource", "nvidia.com/gpu", "extended resource name")
	directory := flag.String("dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory")
	flag.Parse()
	if *count < 1 || *node == "" {
		fail("-count must be at least 1 and -node must be given")
	}
	devices := make([]*pluginapi.Device, *count)
	for i := range devices {
		devices[i] = &pluginapi.Device{ID: fmt.Sprintf("%s-gpu-%d", *node, i), Health: pluginapi.Healthy}
	}
	endpoint := "lyra-fake-gpu.sock"
	socket := filepath.Join(*directory, endpoint)
	kubelet := filepath.Join(*directory, "kubelet.sock")
	// The kubelet empties the directory when it starts: listen only once its own socket is there.
	for attempt := 0; attempt < 600; attempt++ {
		if _, err := os.Stat(kubelet); err == nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	_ = os.Remove(socket)
	listener, err := net.Listen("unix", socket)
	if err != nil {
		fail("cannot listen on %s: %v", socket, err)
	}
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, &plugin{devices: devices})
	go func() {
		if err := server.Serve(listener); err != nil {
			fail("serving: %v", err)
		}
	}()
	registered := false
	for attempt := 0; attempt < 600 && !registered; attempt++ {
		registered = register(kubelet, endpoint, *resource) == nil
		if !registered {
			time.Sleep(500 * time.Millisecond) // the kubelet creates its socket a moment after it starts
		}
	}
	if !registered {
		fail("could not register with the kubelet at %s: %v", kubelet, register(kubelet, endpoint, *resource))
	}
	fmt.Printf("lyra-fake-gpu: registered %d %s devices of node %s\n", *count, *resource, *node)
	for {
		time.Sleep(time.Second)
		if _, err := os.Stat(socket); err != nil {
			fail("%s is gone (the kubelet restarted): exiting", socket)
		}
	}
}

func register(kubeletSocket, endpoint, resource string) error {
	connection, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer connection.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(connection).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     endpoint,
		ResourceName: resource,
	})
	return err
}
