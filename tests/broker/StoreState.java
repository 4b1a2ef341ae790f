package rmqdumptest;

import java.io.File;
import java.net.ServerSocket;
import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.SelectMappedBufferResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;
import org.apache.rocketmq.store.timer.Slot;
import org.apache.rocketmq.store.timer.TimerCheckpoint;
import org.apache.rocketmq.store.timer.TimerMessageStore;
import org.apache.rocketmq.store.timer.TimerMetrics;

/**
 * The compaction and timer state a broker restarts with (a test helper of rmqdump, not shipped).
 *
 * usage: StoreState compaction STORECOPY CL_FILE_SIZE CQ_FILE_SIZE SLOTS ENTRIES LOG_SIZE CCQ_SIZE TOPIC QUEUES
 *   Loads and starts the copy with TOPIC declared cleanup.policy=COMPACTION (compactionMappedFileSize LOG_SIZE,
 *   compactionCqMappedFileSize CCQ_SIZE), then pulls every queue of TOPIC from offset 0 to its end with
 *   DefaultMessageStore.getMessage (which hands a COMPACTION topic to CompactionStore): one JSON line per queue,
 *   the served [queueOffset, compaction log offset, size].
 * usage: StoreState timer STORECOPY CL_FILE_SIZE CQ_FILE_SIZE SLOTS ENTRIES TIMERLOG_SIZE PRECISION_MS TIME_MS...
 *   Wires a TimerMessageStore as BrokerController does (config/timercheck, config/timermetrics), loads the store and
 *   the timer (TimerMessageStore.recover), prints the queue offset and read time it recovered to, and for each
 *   TIME_MS the wheel slot and every unit of its chain, with what the dequeue's getMessageByCommitOffset reads
 *   for it (CommitLog getData of offsetPy/sizePy, MessageDecoder.decode): the message's REAL_TOPIC and UNIQ_KEY,
 *   or null when it reads none. Nothing is started: no message is delivered.
 * Runs on a throw-away copy: load() may truncate, start() writes.
 */
public class StoreState {
    /** The store's settings, the four sizes read from a[at..at+3] (CommitLog file, ConsumeQueue file, slots, entries); also PullAt's. */
    static MessageStoreConfig config(File root, String[] a, int at) throws Exception {
        MessageStoreConfig c = new MessageStoreConfig();
        c.setStorePathRootDir(root.getPath());
        c.setStorePathCommitLog(root.getPath() + File.separator + "commitlog");
        c.setMappedFileSizeCommitLog(Integer.parseInt(a[at]));
        c.setMappedFileSizeConsumeQueue(Integer.parseInt(a[at + 1]));
        c.setMaxHashSlotNum(Integer.parseInt(a[at + 2]));
        c.setMaxIndexNum(Integer.parseInt(a[at + 3]));
        try (ServerSocket ss = new ServerSocket(0)) {
            c.setHaListenPort(ss.getLocalPort());
        }
        return c;
    }

    /** load() (the broker's recovery; a failure is printed as a JSON error and ends the program), start(), and wait
     *  (at most a minute) until the reput service has dispatched the whole CommitLog; also PullAt's. */
    static void startAndDispatch(DefaultMessageStore store) throws Exception {
        if (!store.load()) {
            System.out.println("{\"error\": \"load failed\"}");
            Runtime.getRuntime().halt(1);
        }
        store.start();
        long deadline = System.currentTimeMillis() + 60_000;
        while (store.dispatchBehindBytes() > 0 && System.currentTimeMillis() < deadline) {
            Thread.sleep(5);
        }
    }

    static DefaultMessageStore store(MessageStoreConfig c, ConcurrentMap<String, TopicConfig> topics) throws Exception {
        return new DefaultMessageStore(c, new BrokerStatsManager("storestate", true),
            (topic, queueId, logicOffset, tagsCode, msgStoreTime, filterBitMap, properties) -> { }, new BrokerConfig(), topics);
    }

    public static void main(String[] a) throws Exception {
        File root = new File(a[1]).getAbsoluteFile();
        MessageStoreConfig c = config(root, a, 2);
        if (a[0].equals("compaction")) {
            c.setCompactionMappedFileSize(Integer.parseInt(a[6]));
            c.setCompactionCqMappedFileSize(Integer.parseInt(a[7]));
            String topic = a[8];
            int queues = Integer.parseInt(a[9]);
            TopicConfig tc = new TopicConfig(topic, queues, queues);
            Map<String, String> attrs = new HashMap<>();
            attrs.put("cleanup.policy", "COMPACTION");
            tc.setAttributes(attrs);
            ConcurrentMap<String, TopicConfig> topics = new ConcurrentHashMap<>();
            topics.put(topic, tc);
            DefaultMessageStore store = store(c, topics);
            startAndDispatch(store);
            for (int q = 0; q < queues; q++) {
                StringBuilder sb = new StringBuilder("{\"queue_id\": " + q + ", \"served\": [");
                long offset = 0;
                boolean first = true;
                for (int round = 0; round < 100_000; round++) {
                    GetMessageResult r = store.getMessage("rmqdump-test", topic, q, offset, 32, null);
                    if (r == null) {
                        break;
                    }
                    List<Long> qo = r.getMessageQueueOffset();
                    List<SelectMappedBufferResult> bufs = r.getMessageMapedList();
                    for (int k = 0; k < bufs.size(); k++) {
                        sb.append(first ? "" : ", ").append('[').append(qo.get(k)).append(", ")
                            .append(bufs.get(k).getStartOffset()).append(", ").append(bufs.get(k).getSize()).append(']');
                        first = false;
                    }
                    long next = r.getNextBeginOffset();
                    r.release();
                    if (next <= offset) {
                        break;
                    }
                    offset = next;
                }
                System.out.println(sb.append("]}"));
            }
        } else {
            c.setTimerWheelEnable(true);
            c.setMappedFileSizeTimerLog(Integer.parseInt(a[6]));
            c.setTimerPrecisionMs(Integer.parseInt(a[7]));
            DefaultMessageStore store = store(c, new ConcurrentHashMap<>());
            TimerCheckpoint ckpt = new TimerCheckpoint(root.getPath() + File.separator + "config" + File.separator + "timercheck");
            TimerMetrics metrics = new TimerMetrics(root.getPath() + File.separator + "config" + File.separator + "timermetrics");
            TimerMessageStore timer = new TimerMessageStore(store, c, ckpt, metrics, null);
            store.setTimerMessageStore(timer);
            if (!store.load() || !timer.load()) {
                System.out.println("{\"error\": \"load failed\"}");
                Runtime.getRuntime().halt(1);
            }
            System.out.println("{\"kind\": \"timer\", \"queueOffset\": " + timer.getQueueOffset() + ", \"commitQueueOffset\": "
                + timer.getCommitQueueOffset() + ", \"currReadTimeMs\": " + timer.getCurrReadTimeMs() + "}");
            ByteBuffer bb = ByteBuffer.allocateDirect(c.getMaxMessageSize() + 100);
            for (int i = 8; i < a.length; i++) {
                long time = Long.parseLong(a[i]);
                Slot s = timer.getTimerWheel().getSlot(time);
                StringBuilder sb = new StringBuilder("{\"kind\": \"slot\", \"timeMs\": " + time + ", \"slotTimeMs\": " + s.timeMs
                    + ", \"firstPos\": " + s.firstPos + ", \"lastPos\": " + s.lastPos + ", \"num\": " + s.num + ", \"units\": [");
                long pos = s.lastPos;
                boolean first = true;
                for (int guard = 0; pos != -1 && guard < 100_000; guard++) {
                    SelectMappedBufferResult r = timer.getTimerLog().getTimerMessage(pos);
                    if (r == null) {
                        break;
                    }
                    ByteBuffer u = r.getByteBuffer();
                    u.getInt();
                    long prev = u.getLong();
                    int magic = u.getInt();
                    u.getLong();
                    u.getInt();
                    long offsetPy = u.getLong();
                    int sizePy = u.getInt();
                    r.release();
                    String realTopic = null;
                    String uniq = null;
                    bb.clear();
                    bb.limit(sizePy);
                    if (store.getData(offsetPy, sizePy, bb)) {
                        bb.flip();
                        MessageExt m = MessageDecoder.decode(bb, true, false, false);
                        if (m != null) {
                            realTopic = m.getProperty(MessageConst.PROPERTY_REAL_TOPIC);
                            uniq = m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX);
                            if (realTopic == null) {
                                realTopic = "<none: topic '" + m.getTopic() + "'>";
                            }
                        }
                    }
                    sb.append(first ? "" : ", ").append("{\"pos\": ").append(pos).append(", \"magic\": ").append(magic)
                        .append(", \"offsetPy\": ").append(offsetPy).append(", \"sizePy\": ").append(sizePy)
                        .append(", \"realTopic\": ").append(realTopic == null ? "null" : "\"" + realTopic.replace("'", "") + "\"")
                        .append(", \"uniqKey\": ").append(uniq == null ? "null" : "\"" + uniq + "\"").append('}');
                    first = false;
                    pos = prev;
                }
                System.out.println(sb.append("]}"));
            }
        }
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }
}
