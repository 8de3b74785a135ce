//go:build goolm

package matrix

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/crypto/attachment"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/format"
	"maunium.net/go/mautrix/id"

	"github.com/fluffy-agent/fluffy/internal/channel"
)

var errNotConnected = errors.New("matrix: not connected")

// Send posts a session's reply: Markdown as Matrix HTML; a long reply
// as a one-line summary with the whole text in a thread under it, a very
// long one as a file in that thread. In an encrypted room all of it is
// encrypted (the file too).
func (c *Channel) Send(ctx context.Context, conv channel.Conversation, msg channel.Outbound) error {
	cli, _, _, err := c.conn()
	if err != nil {
		return err
	}
	room, thread := splitRoom(conv.Room)
	c.stopTyping(room)
	text := msg.Text
	if len(text) <= threadAbove && strings.Count(text, "\n") < threadAboveLines {
		_, err := c.post(ctx, cli, room, thread, format.RenderMarkdown(text, true, false))
		return err
	}
	root := thread
	if root == "" {
		summary := summaryLine(text)
		content := format.RenderMarkdown(summary+" (the whole text is in the thread)", true, false)
		ev, err := c.post(ctx, cli, room, "", content)
		if err != nil {
			return err
		}
		root = ev
	}
	if len(text) > fileAbove {
		return c.sendFile(ctx, cli, room, root, "reply.md", []byte(text))
	}
	_, err = c.post(ctx, cli, room, root, format.RenderMarkdown(text, true, false))
	return err
}

// summaryLine is a long text's first non-empty line, shortened.
func summaryLine(text string) string {
	for l := range strings.SplitSeq(text, "\n") {
		l = strings.TrimSpace(strings.TrimLeft(l, "#>*- "))
		if l == "" || strings.HasPrefix(l, "```") {
			continue
		}
		if r := []rune(l); len(r) > 120 {
			l = string(r[:119]) + "…"
		}
		return l
	}
	return "Long output"
}

// post sends one m.room.message, in thread when set, and returns its id.
func (c *Channel) post(ctx context.Context, cli *mautrix.Client, room id.RoomID, thread id.EventID, content event.MessageEventContent) (id.EventID, error) {
	if thread != "" {
		content.RelatesTo = (&event.RelatesTo{}).SetThread(thread, thread)
	}
	var resp *mautrix.RespSendEvent
	err := limited(ctx, func() (err error) {
		resp, err = cli.SendMessageEvent(ctx, room, event.EventMessage, &content)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("matrix %s: send to %s: %w", c.name, room, err)
	}
	return resp.EventID, nil
}

// notice posts a notice (the bot's own remarks: refusals, answers).
func (c *Channel) notice(ctx context.Context, cli *mautrix.Client, room id.RoomID, thread id.EventID, text string) error {
	content := format.RenderMarkdown(text, true, false)
	content.MsgType = event.MsgNotice
	_, err := c.post(ctx, cli, room, thread, content)
	return err
}

// sendFile uploads data as a file (encrypted with a fresh key in an
// encrypted room) and posts it in thread.
func (c *Channel) sendFile(ctx context.Context, cli *mautrix.Client, room id.RoomID, thread id.EventID, name string, data []byte) error {
	encrypted, err := cli.StateStore.IsEncrypted(ctx, room)
	if err != nil {
		return fmt.Errorf("matrix %s: %w", c.name, err)
	}
	content := event.MessageEventContent{MsgType: event.MsgFile, Body: name, FileName: name,
		Info: &event.FileInfo{MimeType: "text/markdown", Size: len(data)}}
	upload, mime := data, "text/markdown"
	var file *attachment.EncryptedFile
	if encrypted {
		file = attachment.NewEncryptedFile()
		upload, mime = append([]byte(nil), data...), "application/octet-stream"
		file.EncryptInPlace(upload)
	}
	var resp *mautrix.RespMediaUpload
	err = limited(ctx, func() (err error) {
		resp, err = cli.UploadBytes(ctx, upload, mime)
		return err
	})
	if err != nil {
		return fmt.Errorf("matrix %s: upload %s: %w", c.name, name, err)
	}
	if file != nil {
		content.File = &event.EncryptedFileInfo{EncryptedFile: *file, URL: resp.ContentURI.CUString()}
	} else {
		content.URL = resp.ContentURI.CUString()
	}
	_, err = c.post(ctx, cli, room, thread, content)
	return err
}

// startTyping shows the bot typing in room until the turn ends
// (TurnEnded, Send) or the channel stops, renewing the notification.
func (c *Channel) startTyping(room id.RoomID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cli == nil {
		return
	}
	if _, on := c.typing[room]; on {
		return
	}
	cli := c.cli
	ctx, cancel := context.WithCancel(context.Background())
	c.typing[room] = cancel
	go func() {
		t := time.NewTicker(typingFor * 2 / 3)
		defer t.Stop()
		for {
			if _, err := cli.UserTyping(ctx, room, true, typingFor); err != nil && ctx.Err() == nil {
				c.log.Debug("matrix: typing notification", "room", room, "err", err)
			}
			select {
			case <-ctx.Done():
				sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, _ = cli.UserTyping(sctx, room, false, 0)
				scancel()
				return
			case <-t.C:
			}
		}
	}()
}

func (c *Channel) stopTyping(room id.RoomID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if stop, ok := c.typing[room]; ok {
		stop()
		delete(c.typing, room)
	}
}

// TurnEnded stops the typing notification of the conversation's room.
func (c *Channel) TurnEnded(_ context.Context, conv channel.Conversation, _, _, _ string) {
	room, _ := splitRoom(conv.Room)
	c.stopTyping(room)
}
